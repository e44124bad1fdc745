! pompy Fortran oracle: advection and horizontal diffusion.
! advct, advave, advu, advv, advt1, advt2, smol_adif, advq, vertvl.
! Work arrays that pom2k passes (a, c, ee, tps, zflux) are explicit
! arguments under the dummy names pom2k gives them.

subroutine advct(im, jm, kb, u, v, ub, vb, dt, aam, dx, dy, aru, arv, &
                 advx, advy, xflux, yflux, curv)
  ! pom2k advct: horizontal advection and diffusion of 3-D momentum,
  ! with curvature terms. Called as advct(a,c,ee).
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), ub(im,jm,kb), vb(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), aam(im,jm,kb)
  real(8), intent(in) :: dx(im,jm), dy(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(inout) :: advx(im,jm,kb), advy(im,jm,kb)
  real(8), intent(inout) :: xflux(im,jm,kb), yflux(im,jm,kb), curv(im,jm,kb)
  real(8) :: dtaam
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        curv(i,j,k) = 0.d0
        advx(i,j,k) = 0.d0
        xflux(i,j,k) = 0.d0
        yflux(i,j,k) = 0.d0
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        curv(i,j,k) = .25d0*((v(i,j+1,k) + v(i,j,k))*(dy(i+1,j) - dy(i-1,j)) &
                             - (u(i+1,j,k) + u(i,j,k))*(dx(i,j+1) - dx(i,j-1))) &
                      /(dx(i,j)*dy(i,j))
      end do
    end do
  end do
  ! x-component: advective fluxes
  do k = 1, kbm1
    do j = 1, jm
      do i = 2, imm1
        xflux(i,j,k) = .125d0*((dt(i+1,j) + dt(i,j))*u(i+1,j,k) &
                               + (dt(i,j) + dt(i-1,j))*u(i,j,k)) &
                       *(u(i+1,j,k) + u(i,j,k))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        yflux(i,j,k) = .125d0*((dt(i,j) + dt(i,j-1))*v(i,j,k) &
                               + (dt(i-1,j) + dt(i-1,j-1))*v(i-1,j,k)) &
                       *(u(i,j,k) + u(i,j-1,k))
      end do
    end do
  end do
  ! x-component: diffusive fluxes
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, imm1
        xflux(i,j,k) = xflux(i,j,k) &
                       - dt(i,j)*aam(i,j,k)*2.d0*(ub(i+1,j,k) - ub(i,j,k))/dx(i,j)
        dtaam = .25d0*(dt(i,j) + dt(i-1,j) + dt(i,j-1) + dt(i-1,j-1)) &
                *(aam(i,j,k) + aam(i-1,j,k) + aam(i,j-1,k) + aam(i-1,j-1,k))
        yflux(i,j,k) = yflux(i,j,k) &
                       - dtaam*((ub(i,j,k) - ub(i,j-1,k)) &
                                /(dy(i,j) + dy(i-1,j) + dy(i,j-1) + dy(i-1,j-1)) &
                                + (vb(i,j,k) - vb(i-1,j,k)) &
                                /(dx(i,j) + dx(i-1,j) + dx(i,j-1) + dx(i-1,j-1)))
        xflux(i,j,k) = dy(i,j)*xflux(i,j,k)
        yflux(i,j,k) = .25d0*(dx(i,j) + dx(i-1,j) + dx(i,j-1) + dx(i-1,j-1))*yflux(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        advx(i,j,k) = xflux(i,j,k) - xflux(i-1,j,k) + yflux(i,j+1,k) - yflux(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 3, imm1
        advx(i,j,k) = advx(i,j,k) &
                      - aru(i,j)*.25d0*(curv(i,j,k)*dt(i,j)*(v(i,j+1,k) + v(i,j,k)) &
                                        + curv(i-1,j,k)*dt(i-1,j)*(v(i-1,j+1,k) + v(i-1,j,k)))
      end do
    end do
  end do
  ! y-component
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        advy(i,j,k) = 0.d0
        xflux(i,j,k) = 0.d0
        yflux(i,j,k) = 0.d0
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = .125d0*((dt(i,j) + dt(i-1,j))*u(i,j,k) &
                               + (dt(i,j-1) + dt(i-1,j-1))*u(i,j-1,k)) &
                       *(v(i,j,k) + v(i-1,j,k))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 1, im
        yflux(i,j,k) = .125d0*((dt(i,j+1) + dt(i,j))*v(i,j+1,k) &
                               + (dt(i,j) + dt(i,j-1))*v(i,j,k)) &
                       *(v(i,j+1,k) + v(i,j,k))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, im
        dtaam = .25d0*(dt(i,j) + dt(i-1,j) + dt(i,j-1) + dt(i-1,j-1)) &
                *(aam(i,j,k) + aam(i-1,j,k) + aam(i,j-1,k) + aam(i-1,j-1,k))
        xflux(i,j,k) = xflux(i,j,k) &
                       - dtaam*((ub(i,j,k) - ub(i,j-1,k)) &
                                /(dy(i,j) + dy(i-1,j) + dy(i,j-1) + dy(i-1,j-1)) &
                                + (vb(i,j,k) - vb(i-1,j,k)) &
                                /(dx(i,j) + dx(i-1,j) + dx(i,j-1) + dx(i-1,j-1)))
        yflux(i,j,k) = yflux(i,j,k) &
                       - dt(i,j)*aam(i,j,k)*2.d0*(vb(i,j+1,k) - vb(i,j,k))/dy(i,j)
        xflux(i,j,k) = .25d0*(dy(i,j) + dy(i-1,j) + dy(i,j-1) + dy(i-1,j-1))*xflux(i,j,k)
        yflux(i,j,k) = dx(i,j)*yflux(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        advy(i,j,k) = xflux(i+1,j,k) - xflux(i,j,k) + yflux(i,j,k) - yflux(i,j-1,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 3, jmm1
      do i = 2, imm1
        advy(i,j,k) = advy(i,j,k) &
                      + arv(i,j)*.25d0*(curv(i,j,k)*dt(i,j)*(u(i+1,j,k) + u(i,j,k)) &
                                        + curv(i,j-1,k)*dt(i,j-1)*(u(i+1,j-1,k) + u(i,j-1,k)))
      end do
    end do
  end do
end subroutine advct


subroutine advave(im, jm, mode, d, ua, va, uab, vab, aam2d, cbc, dx, dy, aru, arv, &
                  advua, advva, fluxua, fluxva, wubot, wvbot, curv2d)
  ! pom2k advave: advection and diffusion of depth-averaged momentum;
  ! in mode 2 also bottom stress and curvature. Called as advave(tps):
  ! curv2d doubles as pom2k's tps work array, as in pom2k.
  implicit none
  integer, intent(in) :: im, jm, mode
  real(8), intent(in) :: d(im,jm), ua(im,jm), va(im,jm), uab(im,jm), vab(im,jm)
  real(8), intent(in) :: aam2d(im,jm), cbc(im,jm)
  real(8), intent(in) :: dx(im,jm), dy(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(inout) :: advua(im,jm), advva(im,jm), fluxua(im,jm), fluxva(im,jm)
  real(8), intent(inout) :: wubot(im,jm), wvbot(im,jm), curv2d(im,jm)
  integer :: i, j, imm1, jmm1

  imm1 = im - 1
  jmm1 = jm - 1
  ! u-advection and diffusion
  do j = 1, jm
    do i = 1, im
      advua(i,j) = 0.d0
    end do
  end do
  do j = 2, jm
    do i = 2, imm1
      fluxua(i,j) = .125d0*((d(i+1,j) + d(i,j))*ua(i+1,j) + (d(i,j) + d(i-1,j))*ua(i,j)) &
                    *(ua(i+1,j) + ua(i,j))
    end do
  end do
  do j = 2, jm
    do i = 2, im
      fluxva(i,j) = .125d0*((d(i,j) + d(i,j-1))*va(i,j) + (d(i-1,j) + d(i-1,j-1))*va(i-1,j)) &
                    *(ua(i,j) + ua(i,j-1))
    end do
  end do
  do j = 2, jm
    do i = 2, imm1
      fluxua(i,j) = fluxua(i,j) - d(i,j)*2.d0*aam2d(i,j)*(uab(i+1,j) - uab(i,j))/dx(i,j)
    end do
  end do
  do j = 2, jm
    do i = 2, im
      curv2d(i,j) = .25d0*(d(i,j) + d(i-1,j) + d(i,j-1) + d(i-1,j-1)) &
                    *(aam2d(i,j) + aam2d(i,j-1) + aam2d(i-1,j) + aam2d(i-1,j-1)) &
                    *((uab(i,j) - uab(i,j-1))/(dy(i,j) + dy(i-1,j) + dy(i,j-1) + dy(i-1,j-1)) &
                      + (vab(i,j) - vab(i-1,j))/(dx(i,j) + dx(i-1,j) + dx(i,j-1) + dx(i-1,j-1)))
      fluxua(i,j) = fluxua(i,j)*dy(i,j)
      fluxva(i,j) = (fluxva(i,j) - curv2d(i,j))*.25d0 &
                    *(dx(i,j) + dx(i-1,j) + dx(i,j-1) + dx(i-1,j-1))
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      advua(i,j) = fluxua(i,j) - fluxua(i-1,j) + fluxva(i,j+1) - fluxva(i,j)
    end do
  end do
  ! v-advection and diffusion
  do j = 1, jm
    do i = 1, im
      advva(i,j) = 0.d0
    end do
  end do
  do j = 2, jm
    do i = 2, im
      fluxua(i,j) = .125d0*((d(i,j) + d(i-1,j))*ua(i,j) + (d(i,j-1) + d(i-1,j-1))*ua(i,j-1)) &
                    *(va(i-1,j) + va(i,j))
    end do
  end do
  do j = 2, jmm1
    do i = 2, im
      fluxva(i,j) = .125d0*((d(i,j+1) + d(i,j))*va(i,j+1) + (d(i,j) + d(i,j-1))*va(i,j)) &
                    *(va(i,j+1) + va(i,j))
    end do
  end do
  do j = 2, jmm1
    do i = 2, im
      fluxva(i,j) = fluxva(i,j) - d(i,j)*2.d0*aam2d(i,j)*(vab(i,j+1) - vab(i,j))/dy(i,j)
    end do
  end do
  do j = 2, jm
    do i = 2, im
      fluxva(i,j) = fluxva(i,j)*dx(i,j)
      fluxua(i,j) = (fluxua(i,j) - curv2d(i,j))*.25d0 &
                    *(dy(i,j) + dy(i-1,j) + dy(i,j-1) + dy(i-1,j-1))
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      advva(i,j) = fluxua(i+1,j) - fluxua(i,j) + fluxva(i,j) - fluxva(i,j-1)
    end do
  end do

  if (mode == 2) then
    do j = 2, jmm1
      do i = 2, imm1
        wubot(i,j) = -0.5d0*(cbc(i,j) + cbc(i-1,j)) &
                     *sqrt(uab(i,j)**2 + (.25d0*(vab(i,j) + vab(i,j+1) &
                                                 + vab(i-1,j) + vab(i-1,j+1)))**2) &
                     *uab(i,j)
      end do
    end do
    do j = 2, jmm1
      do i = 2, imm1
        wvbot(i,j) = -0.5d0*(cbc(i,j) + cbc(i,j-1)) &
                     *sqrt(vab(i,j)**2 + (.25d0*(uab(i,j) + uab(i+1,j) &
                                                 + uab(i,j-1) + uab(i+1,j-1)))**2) &
                     *vab(i,j)
      end do
    end do
    do j = 2, jmm1
      do i = 2, imm1
        curv2d(i,j) = .25d0*((va(i,j+1) + va(i,j))*(dy(i+1,j) - dy(i-1,j)) &
                             - (ua(i+1,j) + ua(i,j))*(dx(i,j+1) - dx(i,j-1))) &
                      /(dx(i,j)*dy(i,j))
      end do
    end do
    do j = 2, jmm1
      do i = 3, imm1
        advua(i,j) = advua(i,j) - aru(i,j)*.25d0 &
                     *(curv2d(i,j)*d(i,j)*(va(i,j+1) + va(i,j)) &
                       + curv2d(i-1,j)*d(i-1,j)*(va(i-1,j+1) + va(i-1,j)))
      end do
    end do
    do j = 3, jmm1
      do i = 2, imm1
        advva(i,j) = advva(i,j) + arv(i,j)*.25d0 &
                     *(curv2d(i,j)*d(i,j)*(ua(i+1,j) + ua(i,j)) &
                       + curv2d(i,j-1)*d(i,j-1)*(ua(i+1,j-1) + ua(i,j-1)))
      end do
    end do
  end if
end subroutine advave


subroutine advu(im, jm, kb, grav, dti2, dz, u, v, w, ub, advx, drhox, dt, h, etb, etf, &
                egf, egb, e_atmos, cor, dy, aru, uf)
  ! pom2k advu: vertical advection, Coriolis, surface slope and baroclinic
  ! terms, then the leapfrog step of u into uf.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: grav, dti2, dz(kb)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), w(im,jm,kb), ub(im,jm,kb)
  real(8), intent(in) :: advx(im,jm,kb), drhox(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), h(im,jm), etb(im,jm), etf(im,jm)
  real(8), intent(in) :: egf(im,jm), egb(im,jm), e_atmos(im,jm), cor(im,jm)
  real(8), intent(in) :: dy(im,jm), aru(im,jm)
  real(8), intent(inout) :: uf(im,jm,kb)
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        uf(i,j,k) = 0.d0
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 2, im
        uf(i,j,k) = .25d0*(w(i,j,k) + w(i-1,j,k))*(u(i,j,k) + u(i,j,k-1))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        uf(i,j,k) = advx(i,j,k) + (uf(i,j,k) - uf(i,j,k+1))*aru(i,j)/dz(k) &
                    - aru(i,j)*.25d0*(cor(i,j)*dt(i,j)*(v(i,j+1,k) + v(i,j,k)) &
                                      + cor(i-1,j)*dt(i-1,j)*(v(i-1,j+1,k) + v(i-1,j,k))) &
                    + grav*.125d0*(dt(i,j) + dt(i-1,j)) &
                      *(egf(i,j) - egf(i-1,j) + egb(i,j) - egb(i-1,j) &
                        + (e_atmos(i,j) - e_atmos(i-1,j))*2.d0) &
                      *(dy(i,j) + dy(i-1,j)) &
                    + drhox(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        uf(i,j,k) = ((h(i,j) + etb(i,j) + h(i-1,j) + etb(i-1,j))*aru(i,j)*ub(i,j,k) &
                     - 2.d0*dti2*uf(i,j,k)) &
                    /((h(i,j) + etf(i,j) + h(i-1,j) + etf(i-1,j))*aru(i,j))
      end do
    end do
  end do
end subroutine advu


subroutine advv(im, jm, kb, grav, dti2, dz, u, v, w, vb, advy, drhoy, dt, h, etb, etf, &
                egf, egb, e_atmos, cor, dx, arv, vf)
  ! pom2k advv: as advu for the v component, into vf.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: grav, dti2, dz(kb)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), w(im,jm,kb), vb(im,jm,kb)
  real(8), intent(in) :: advy(im,jm,kb), drhoy(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), h(im,jm), etb(im,jm), etf(im,jm)
  real(8), intent(in) :: egf(im,jm), egb(im,jm), e_atmos(im,jm), cor(im,jm)
  real(8), intent(in) :: dx(im,jm), arv(im,jm)
  real(8), intent(inout) :: vf(im,jm,kb)
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        vf(i,j,k) = 0.d0
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 2, jm
      do i = 1, im
        vf(i,j,k) = .25d0*(w(i,j,k) + w(i,j-1,k))*(v(i,j,k) + v(i,j,k-1))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        vf(i,j,k) = advy(i,j,k) + (vf(i,j,k) - vf(i,j,k+1))*arv(i,j)/dz(k) &
                    + arv(i,j)*.25d0*(cor(i,j)*dt(i,j)*(u(i+1,j,k) + u(i,j,k)) &
                                      + cor(i,j-1)*dt(i,j-1)*(u(i+1,j-1,k) + u(i,j-1,k))) &
                    + grav*.125d0*(dt(i,j) + dt(i,j-1)) &
                      *(egf(i,j) - egf(i,j-1) + egb(i,j) - egb(i,j-1) &
                        + (e_atmos(i,j) - e_atmos(i,j-1))*2.d0) &
                      *(dx(i,j) + dx(i,j-1)) &
                    + drhoy(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        vf(i,j,k) = ((h(i,j) + etb(i,j) + h(i,j-1) + etb(i,j-1))*arv(i,j)*vb(i,j,k) &
                     - 2.d0*dti2*vf(i,j,k)) &
                    /((h(i,j) + etf(i,j) + h(i,j-1) + etf(i,j-1))*arv(i,j))
      end do
    end do
  end do
end subroutine advv


subroutine advt1(im, jm, kb, dti2, tprni, dz, u, v, w, aam, dt, h, etb, etf, &
                 dx, dy, art, dum, dvm, fb, f, fclim, ff, xflux, yflux, zflux)
  ! pom2k advt1: centred advection and diffusion (of f-fclim) of a
  ! tracer, leapfrog step into ff. Called as advt1(tb,t,tclim,uf,a,c).
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, tprni, dz(kb)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), w(im,jm,kb), aam(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), h(im,jm), etb(im,jm), etf(im,jm)
  real(8), intent(in) :: dx(im,jm), dy(im,jm), art(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(in) :: fclim(im,jm,kb)
  real(8), intent(inout) :: fb(im,jm,kb), f(im,jm,kb), ff(im,jm,kb)
  real(8), intent(inout) :: xflux(im,jm,kb), yflux(im,jm,kb), zflux(im,jm,kb)
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do j = 1, jm
    do i = 1, im
      f(i,j,kb) = f(i,j,kbm1)
      fb(i,j,kb) = fb(i,j,kbm1)
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = .25d0*((dt(i,j) + dt(i-1,j))*(f(i,j,k) + f(i-1,j,k))*u(i,j,k))
        yflux(i,j,k) = .25d0*((dt(i,j) + dt(i,j-1))*(f(i,j,k) + f(i,j-1,k))*v(i,j,k))
      end do
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        fb(i,j,k) = fb(i,j,k) - fclim(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = xflux(i,j,k) &
                       - .5d0*(aam(i,j,k) + aam(i-1,j,k))*(h(i,j) + h(i-1,j))*tprni &
                         *(fb(i,j,k) - fb(i-1,j,k))*dum(i,j)/(dx(i,j) + dx(i-1,j))
        yflux(i,j,k) = yflux(i,j,k) &
                       - .5d0*(aam(i,j,k) + aam(i,j-1,k))*(h(i,j) + h(i,j-1))*tprni &
                         *(fb(i,j,k) - fb(i,j-1,k))*dvm(i,j)/(dy(i,j) + dy(i,j-1))
        xflux(i,j,k) = .5d0*(dy(i,j) + dy(i-1,j))*xflux(i,j,k)
        yflux(i,j,k) = .5d0*(dx(i,j) + dx(i,j-1))*yflux(i,j,k)
      end do
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        fb(i,j,k) = fb(i,j,k) + fclim(i,j,k)
      end do
    end do
  end do
  ! vertical advection
  do j = 2, jmm1
    do i = 2, imm1
      zflux(i,j,1) = f(i,j,1)*w(i,j,1)*art(i,j)
      zflux(i,j,kb) = 0.d0
    end do
  end do
  do k = 2, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        zflux(i,j,k) = .5d0*(f(i,j,k-1) + f(i,j,k))*w(i,j,k)*art(i,j)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        ff(i,j,k) = xflux(i+1,j,k) - xflux(i,j,k) + yflux(i,j+1,k) - yflux(i,j,k) &
                    + (zflux(i,j,k) - zflux(i,j,k+1))/dz(k)
        ff(i,j,k) = (fb(i,j,k)*(h(i,j) + etb(i,j))*art(i,j) - dti2*ff(i,j,k)) &
                    /((h(i,j) + etf(i,j))*art(i,j))
      end do
    end do
  end do
end subroutine advt1


subroutine advt2(im, jm, kb, dti2, tprni, dz, dzz, u, v, w, aam, dt, h, etb, etf, &
                 dx, dy, art, aru, arv, fsm, dum, dvm, fb, f, fclim, ff, &
                 xflux, yflux, zflux, nitera, sw)
  ! pom2k advt2: Smolarkiewicz iterative upstream advection (nitera
  ! passes, antidiffusion scaled by sw) plus horizontal diffusion of
  ! f-fclim. Called as advt2(tb,t,tclim,uf,a,c,nitera,sw).
  implicit none
  integer, intent(in) :: im, jm, kb, nitera
  real(8), intent(in) :: dti2, tprni, sw, dz(kb), dzz(kb)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), w(im,jm,kb), aam(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), h(im,jm), etb(im,jm), etf(im,jm)
  real(8), intent(in) :: dx(im,jm), dy(im,jm), art(im,jm), aru(im,jm), arv(im,jm)
  real(8), intent(in) :: fsm(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(in) :: f(im,jm,kb), fclim(im,jm,kb)
  real(8), intent(inout) :: fb(im,jm,kb), ff(im,jm,kb)
  real(8), intent(inout) :: xflux(im,jm,kb), yflux(im,jm,kb), zflux(im,jm,kb)
  real(8) :: fbmem(im,jm,kb), eta(im,jm)
  real(8) :: xmassflux(im,jm,kb), ymassflux(im,jm,kb), zwflux(im,jm,kb)
  integer :: i, j, k, itera, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        xmassflux(i,j,k) = 0.d0
        ymassflux(i,j,k) = 0.d0
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, im
        xmassflux(i,j,k) = 0.25d0*(dy(i-1,j) + dy(i,j))*(dt(i-1,j) + dt(i,j))*u(i,j,k)
      end do
    end do
    do j = 2, jm
      do i = 2, imm1
        ymassflux(i,j,k) = 0.25d0*(dx(i,j-1) + dx(i,j))*(dt(i,j-1) + dt(i,j))*v(i,j,k)
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      fb(i,j,kb) = fb(i,j,kbm1)
      eta(i,j) = etb(i,j)
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        zwflux(i,j,k) = w(i,j,k)
        fbmem(i,j,k) = fb(i,j,k)
      end do
    end do
  end do
  do itera = 1, nitera
    ! upwind advection
    do k = 1, kbm1
      do j = 2, jm
        do i = 2, im
          xflux(i,j,k) = 0.5d0*((xmassflux(i,j,k) + abs(xmassflux(i,j,k)))*fbmem(i-1,j,k) &
                                + (xmassflux(i,j,k) - abs(xmassflux(i,j,k)))*fbmem(i,j,k))
          yflux(i,j,k) = 0.5d0*((ymassflux(i,j,k) + abs(ymassflux(i,j,k)))*fbmem(i,j-1,k) &
                                + (ymassflux(i,j,k) - abs(ymassflux(i,j,k)))*fbmem(i,j,k))
        end do
      end do
    end do
    do j = 2, jmm1
      do i = 2, imm1
        zflux(i,j,1) = 0.d0
        if (itera == 1) zflux(i,j,1) = w(i,j,1)*f(i,j,1)*art(i,j)
        zflux(i,j,kb) = 0.d0
      end do
    end do
    do k = 2, kbm1
      do j = 2, jmm1
        do i = 2, imm1
          zflux(i,j,k) = 0.5d0*((zwflux(i,j,k) + abs(zwflux(i,j,k)))*fbmem(i,j,k) &
                                + (zwflux(i,j,k) - abs(zwflux(i,j,k)))*fbmem(i,j,k-1))
          zflux(i,j,k) = zflux(i,j,k)*art(i,j)
        end do
      end do
    end do
    do k = 1, kbm1
      do j = 2, jmm1
        do i = 2, imm1
          ff(i,j,k) = xflux(i+1,j,k) - xflux(i,j,k) + yflux(i,j+1,k) - yflux(i,j,k) &
                      + (zflux(i,j,k) - zflux(i,j,k+1))/dz(k)
          ff(i,j,k) = (fbmem(i,j,k)*(h(i,j) + eta(i,j))*art(i,j) - dti2*ff(i,j,k)) &
                      /((h(i,j) + etf(i,j))*art(i,j))
        end do
      end do
    end do
    call smol_adif(im, jm, kb, dti2, dzz, dt, aru, arv, fsm, &
                   xmassflux, ymassflux, zwflux, ff, sw)
    do j = 1, jm
      do i = 1, im
        eta(i,j) = etf(i,j)
        do k = 1, kb
          fbmem(i,j,k) = ff(i,j,k)
        end do
      end do
    end do
  end do
  ! horizontal diffusion
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        fb(i,j,k) = fb(i,j,k) - fclim(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        xmassflux(i,j,k) = 0.5d0*(aam(i,j,k) + aam(i-1,j,k))
        ymassflux(i,j,k) = 0.5d0*(aam(i,j,k) + aam(i,j-1,k))
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = -xmassflux(i,j,k)*(h(i,j) + h(i-1,j))*tprni &
                       *(fb(i,j,k) - fb(i-1,j,k))*dum(i,j) &
                       *(dy(i,j) + dy(i-1,j))*0.5d0/(dx(i,j) + dx(i-1,j))
        yflux(i,j,k) = -ymassflux(i,j,k)*(h(i,j) + h(i,j-1))*tprni &
                       *(fb(i,j,k) - fb(i,j-1,k))*dvm(i,j) &
                       *(dx(i,j) + dx(i,j-1))*0.5d0/(dy(i,j) + dy(i,j-1))
      end do
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        fb(i,j,k) = fb(i,j,k) + fclim(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        ff(i,j,k) = ff(i,j,k) - dti2*(xflux(i+1,j,k) - xflux(i,j,k) &
                                      + yflux(i,j+1,k) - yflux(i,j,k)) &
                                /((h(i,j) + etf(i,j))*art(i,j))
      end do
    end do
  end do
end subroutine advt2


subroutine smol_adif(im, jm, kb, dti2, dzz, dt, aru, arv, fsm, &
                     xmassflux, ymassflux, zwflux, ff, sw)
  ! pom2k smol_adif: Smolarkiewicz antidiffusive velocities, scaled by sw;
  ! zero where the tracer is below value_min or the flux would reverse.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, sw, dzz(kb), dt(im,jm), aru(im,jm), arv(im,jm), fsm(im,jm)
  real(8), intent(inout) :: xmassflux(im,jm,kb), ymassflux(im,jm,kb), zwflux(im,jm,kb)
  real(8), intent(inout) :: ff(im,jm,kb)
  real(8), parameter :: value_min = 1.d-9, epsilon = 1.0d-14
  real(8) :: mol, abs_1, abs_2, udx, u2dt, vdy, v2dt, wdz, w2dt
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kb
    do i = 1, im
      do j = 1, jm
        ff(i,j,k) = ff(i,j,k)*fsm(i,j)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, im
        if (ff(i,j,k) < value_min .or. ff(i-1,j,k) < value_min) then
          xmassflux(i,j,k) = 0.d0
        else
          udx = abs(xmassflux(i,j,k))
          u2dt = dti2*xmassflux(i,j,k)*xmassflux(i,j,k)*2.d0/(aru(i,j)*(dt(i-1,j) + dt(i,j)))
          mol = (ff(i,j,k) - ff(i-1,j,k))/(ff(i-1,j,k) + ff(i,j,k) + epsilon)
          xmassflux(i,j,k) = (udx - u2dt)*mol*sw
          abs_1 = abs(udx)
          abs_2 = abs(u2dt)
          if (abs_1 < abs_2) xmassflux(i,j,k) = 0.d0
        end if
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, imm1
        if (ff(i,j,k) < value_min .or. ff(i,j-1,k) < value_min) then
          ymassflux(i,j,k) = 0.d0
        else
          vdy = abs(ymassflux(i,j,k))
          v2dt = dti2*ymassflux(i,j,k)*ymassflux(i,j,k)*2.d0/(arv(i,j)*(dt(i,j-1) + dt(i,j)))
          mol = (ff(i,j,k) - ff(i,j-1,k))/(ff(i,j-1,k) + ff(i,j,k) + epsilon)
          ymassflux(i,j,k) = (vdy - v2dt)*mol*sw
          abs_1 = abs(vdy)
          abs_2 = abs(v2dt)
          if (abs_1 < abs_2) ymassflux(i,j,k) = 0.d0
        end if
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        if (ff(i,j,k) < value_min .or. ff(i,j,k-1) < value_min) then
          zwflux(i,j,k) = 0.d0
        else
          wdz = abs(zwflux(i,j,k))
          w2dt = dti2*zwflux(i,j,k)*zwflux(i,j,k)/(dzz(k-1)*dt(i,j))
          mol = (ff(i,j,k-1) - ff(i,j,k))/(ff(i,j,k) + ff(i,j,k-1) + epsilon)
          zwflux(i,j,k) = (wdz - w2dt)*mol*sw
          abs_1 = abs(wdz)
          abs_2 = abs(w2dt)
          if (abs_1 < abs_2) zwflux(i,j,k) = 0.d0
        end if
      end do
    end do
  end do
end subroutine smol_adif


subroutine advq(im, jm, kb, dti2, dz, u, v, w, aam, dt, h, etb, etf, &
                dx, dy, art, dum, dvm, qb, q, qf, xflux, yflux)
  ! pom2k advq: advection and diffusion of q2 or q2l at w levels
  ! k=2..kbm1, leapfrog step into qf. Called as advq(q2b,q2,uf,a,c).
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, dz(kb)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), w(im,jm,kb), aam(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), h(im,jm), etb(im,jm), etf(im,jm)
  real(8), intent(in) :: dx(im,jm), dy(im,jm), art(im,jm), dum(im,jm), dvm(im,jm)
  real(8), intent(in) :: qb(im,jm,kb), q(im,jm,kb)
  real(8), intent(inout) :: qf(im,jm,kb), xflux(im,jm,kb), yflux(im,jm,kb)
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 2, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = .125d0*(q(i,j,k) + q(i-1,j,k))*(dt(i,j) + dt(i-1,j)) &
                       *(u(i,j,k) + u(i,j,k-1))
        yflux(i,j,k) = .125d0*(q(i,j,k) + q(i,j-1,k))*(dt(i,j) + dt(i,j-1)) &
                       *(v(i,j,k) + v(i,j,k-1))
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = xflux(i,j,k) &
                       - .25d0*(aam(i,j,k) + aam(i-1,j,k) + aam(i,j,k-1) + aam(i-1,j,k-1)) &
                         *(h(i,j) + h(i-1,j))*(qb(i,j,k) - qb(i-1,j,k))*dum(i,j) &
                         /(dx(i,j) + dx(i-1,j))
        yflux(i,j,k) = yflux(i,j,k) &
                       - .25d0*(aam(i,j,k) + aam(i,j-1,k) + aam(i,j,k-1) + aam(i,j-1,k-1)) &
                         *(h(i,j) + h(i,j-1))*(qb(i,j,k) - qb(i,j-1,k))*dvm(i,j) &
                         /(dy(i,j) + dy(i,j-1))
        xflux(i,j,k) = .5d0*(dy(i,j) + dy(i-1,j))*xflux(i,j,k)
        yflux(i,j,k) = .5d0*(dx(i,j) + dx(i,j-1))*yflux(i,j,k)
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        qf(i,j,k) = (w(i,j,k-1)*q(i,j,k-1) - w(i,j,k+1)*q(i,j,k+1))*art(i,j)/(dz(k) + dz(k-1)) &
                    + xflux(i+1,j,k) - xflux(i,j,k) + yflux(i,j+1,k) - yflux(i,j,k)
        qf(i,j,k) = ((h(i,j) + etb(i,j))*art(i,j)*qb(i,j,k) - dti2*qf(i,j,k)) &
                    /((h(i,j) + etf(i,j))*art(i,j))
      end do
    end do
  end do
end subroutine advq


subroutine vertvl(im, jm, kb, dti2, dz, u, v, dt, dx, dy, etf, etb, vfluxb, vfluxf, &
                  w, xflux, yflux)
  ! pom2k vertvl: vertical velocity from continuity, w(1) from the
  ! surface freshwater flux. Called as vertvl(a,c).
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, dz(kb)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb)
  real(8), intent(in) :: dt(im,jm), dx(im,jm), dy(im,jm), etf(im,jm), etb(im,jm)
  real(8), intent(in) :: vfluxb(im,jm), vfluxf(im,jm)
  real(8), intent(inout) :: w(im,jm,kb), xflux(im,jm,kb), yflux(im,jm,kb)
  integer :: i, j, k, imm1, jmm1, kbm1

  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        xflux(i,j,k) = .25d0*(dy(i,j) + dy(i-1,j))*(dt(i,j) + dt(i-1,j))*u(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 2, im
        yflux(i,j,k) = .25d0*(dx(i,j) + dx(i,j-1))*(dt(i,j) + dt(i,j-1))*v(i,j,k)
      end do
    end do
  end do
  do j = 2, jmm1
    do i = 2, imm1
      w(i,j,1) = 0.5d0*(vfluxb(i,j) + vfluxf(i,j))
    end do
  end do
  do k = 1, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        w(i,j,k+1) = w(i,j,k) &
                     + dz(k)*((xflux(i+1,j,k) - xflux(i,j,k) + yflux(i,j+1,k) - yflux(i,j,k)) &
                              /(dx(i,j)*dy(i,j)) + (etf(i,j) - etb(i,j))/dti2)
      end do
    end do
  end do
end subroutine vertvl
