! pompy Fortran oracle: pom2k's main program as callable pieces.
!   initialize       the set-up before the time loop
!   surface_forcing  the surface conditions set at each internal step
!   smagorinsky      the horizontal viscosity aam
!   vertical_averages  depth integrals of the 3-D terms for the 2-D mode
!   external_step    one external (2-D) step iext, with its filter
!   external_mode    the sums for the internal mode and the isplit external steps
!   internal_step    the internal (3-D) step with filters and shifts
!   run_steps        the main loop over iint (the driver), with the external mode
!                    of either scheme (1 mode split, 2 implicit.f90's implicit_step)

subroutine initialize(iproblem, im, jm, kb, kl1, kl2, hmax, slmax, grav, rhoref, &
                      tbias, sbias, small, kappa, z0b, cbcmin, cbcmax, aam_init, &
                      z, zz, dz, dzz, dx, dy, cor, east_c, north_c, east_e, north_e, &
                      east_u, north_u, east_v, north_v, rot, h, art, aru, arv, &
                      fsm, dum, dvm, cbc, tb, sb, t, s, tclim, sclim, ub, vb, u, v, &
                      uab, vab, ua, va, elb, etb, el, et, etf, d, dt, w, aam, aam2d, &
                      rho, rmean, drhox, drhoy, drx2d, dry2d, l, q2b, q2lb, q2, q2l, &
                      km, kh, kq, e_atmos, vfluxb, vfluxf, wusurf, wvsurf, wtsurf, &
                      wssurf, swrad, uabe, uabw, ele, elw, vabn, vabs, eln, els, &
                      tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs, tps)
  ! pom2k main program up to the time loop: zero the arrays, set up the
  ! problem (1 seamount, 2 box, 3 file2ic), initial turbulence and
  ! viscosity, dens, baropg, the bottom friction coefficient cbc and the
  ! external CFL time step tps. Arrays not named here are not touched.
  ! iproblem 3: on entry the state holds the IC file's arrays (see
  ! file2ic), the lateral boundary arrays its boundary values, which are
  ! therefore not zeroed.
  implicit none
  integer, intent(in) :: iproblem, im, jm, kb, kl1, kl2
  real(8), intent(in) :: hmax, slmax, grav, rhoref, tbias, sbias, small, kappa
  real(8), intent(in) :: z0b, cbcmin, cbcmax, aam_init
  real(8), intent(inout) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(inout), dimension(im,jm) :: dx, dy, cor, east_c, north_c, east_e, &
      north_e, east_u, north_u, east_v, north_v, rot, h, art, aru, arv, fsm, dum, dvm, &
      cbc, uab, vab, ua, va, elb, etb, el, et, etf, d, dt, aam2d, drx2d, dry2d, &
      e_atmos, vfluxb, vfluxf, wusurf, wvsurf, wtsurf, wssurf, swrad, tps
  real(8), intent(inout), dimension(im,jm,kb) :: tb, sb, t, s, tclim, sclim, ub, vb, &
      u, v, w, aam, rho, rmean, drhox, drhoy, l, q2b, q2lb, q2, q2l, km, kh, kq
  real(8), intent(inout) :: uabe(jm), uabw(jm), ele(jm), elw(jm), vabn(im), vabs(im)
  real(8), intent(inout) :: eln(im), els(im)
  real(8), intent(inout) :: tbe(jm,kb), tbw(jm,kb), sbe(jm,kb), sbw(jm,kb)
  real(8), intent(inout) :: tbn(im,kb), tbs(im,kb), sbn(im,kb), sbs(im,kb)
  integer :: i, j, k, kbm1

  kbm1 = kb - 1
  ! boundary arrays (iproblem 3: the IC file's)
  if (iproblem /= 3) then
    do i = 1, im
      vabn(i) = 0.d0
      vabs(i) = 0.d0
      eln(i) = 0.d0
      els(i) = 0.d0
      do k = 1, kb
        tbn(i,k) = 0.d0
        tbs(i,k) = 0.d0
        sbn(i,k) = 0.d0
        sbs(i,k) = 0.d0
      end do
    end do
    do j = 1, jm
      uabe(j) = 0.d0
      uabw(j) = 0.d0
      ele(j) = 0.d0
      elw(j) = 0.d0
      do k = 1, kb
        tbe(j,k) = 0.d0
        tbw(j,k) = 0.d0
        sbe(j,k) = 0.d0
        sbw(j,k) = 0.d0
      end do
    end do
  end if
  ! 2-D and 3-D arrays, for safety
  do j = 1, jm
    do i = 1, im
      uab(i,j) = 0.d0
      vab(i,j) = 0.d0
      elb(i,j) = 0.d0
      etb(i,j) = 0.d0
      e_atmos(i,j) = 0.d0
      vfluxb(i,j) = 0.d0
      vfluxf(i,j) = 0.d0
      wusurf(i,j) = 0.d0
      wvsurf(i,j) = 0.d0
      wtsurf(i,j) = 0.d0
      wssurf(i,j) = 0.d0
      swrad(i,j) = 0.d0
      drx2d(i,j) = 0.d0
      dry2d(i,j) = 0.d0
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        ub(i,j,k) = 0.d0
        vb(i,j,k) = 0.d0
      end do
    end do
  end do

  if (iproblem == 1) then
    call seamount(im, jm, kb, kl1, kl2, hmax, slmax, grav, rhoref, tbias, sbias, &
                  aam, e_atmos, z, zz, dz, dzz, dx, dy, cor, &
                  east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot, &
                  h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, ub, uab, &
                  elb, etb, dt, aam2d, rho, rmean, uabe, uabw, ele, elw, &
                  tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs)
  else if (iproblem == 2) then
    call box(im, jm, kb, kl1, kl2, grav, rhoref, tbias, sbias, &
             aam, z, zz, dz, dzz, dx, dy, cor, &
             east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot, &
             h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, &
             elb, etb, dt, aam2d, rho, rmean, e_atmos, vfluxf)
  else if (iproblem == 3) then
    call file2ic(im, jm, kb, kl1, kl2, slmax, grav, rhoref, tbias, sbias, &
                 aam, e_atmos, t, s, u, v, ua, va, el, dx, dy, z, zz, dz, dzz, &
                 east_c, north_c, east_e, north_e, east_u, north_u, east_v, north_v, rot, &
                 h, art, aru, arv, fsm, dum, dvm, tb, sb, tclim, sclim, ub, vb, uab, vab, &
                 elb, etb, dt, aam2d, rho, tbe, tbw, sbe, sbw, tbn, tbs, sbn, sbs)
  end if

  ! initial conditions
  do i = 1, im
    do j = 1, jm
      ua(i,j) = uab(i,j)
      va(i,j) = vab(i,j)
      el(i,j) = elb(i,j)
      et(i,j) = etb(i,j)
      etf(i,j) = et(i,j)
      d(i,j) = h(i,j) + el(i,j)
      dt(i,j) = h(i,j) + et(i,j)
      w(i,j,1) = vfluxf(i,j)
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        l(i,j,k) = 0.1d0*dt(i,j)
        q2b(i,j,k) = small
        q2lb(i,j,k) = l(i,j,k)*q2b(i,j,k)
        kh(i,j,k) = l(i,j,k)*sqrt(q2b(i,j,k))
        km(i,j,k) = kh(i,j,k)
        kq(i,j,k) = kh(i,j,k)
        aam(i,j,k) = aam_init
      end do
    end do
  end do
  do k = 1, kbm1
    do i = 1, im
      do j = 1, jm
        q2(i,j,k) = q2b(i,j,k)
        q2l(i,j,k) = q2lb(i,j,k)
        t(i,j,k) = tb(i,j,k)
        s(i,j,k) = sb(i,j,k)
        u(i,j,k) = ub(i,j,k)
        v(i,j,k) = vb(i,j,k)
      end do
    end do
  end do
  call dens(im, jm, kb, grav, rhoref, tbias, sbias, zz, h, fsm, s, t, rho)
  call baropg(im, jm, kb, grav, zz, dx, dy, dt, dum, dvm, rmean, rho, drhox, drhoy)
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        drx2d(i,j) = drx2d(i,j) + drhox(i,j,k)*dz(k)
        dry2d(i,j) = dry2d(i,j) + drhoy(i,j,k)*dz(k)
      end do
    end do
  end do
  ! bottom friction coefficient
  do j = 1, jm
    do i = 1, im
      cbc(i,j) = (kappa/log((1.d0 + zz(kbm1))*h(i,j)/z0b))**2
      cbc(i,j) = max(cbcmin, cbc(i,j))
      ! if this bites, z0b or the vertical spacing is probably wrong
      cbc(i,j) = min(cbcmax, cbc(i,j))
    end do
  end do
  ! external (2-D) CFL time step
  do j = 1, jm
    do i = 1, im
      tps(i,j) = 0.5d0/sqrt(1.d0/dx(i,j)**2 + 1.d0/dy(i,j)**2)/sqrt(grav*(h(i,j) + small)) &
                 *fsm(i,j)
    end do
  end do
  do j = 1, jm
    do i = 1, im
      d(i,j) = h(i,j) + el(i,j)
      dt(i,j) = h(i,j) + et(i,j)
    end do
  end do
end subroutine initialize


subroutine surface_forcing(iproblem, im, jm, kb, ramp, tbias, sbias, dvm, t, s, &
                           tclim, sclim, wusurf, wvsurf, e_atmos, vfluxf, w, &
                           wtsurf, swrad, wssurf)
  ! pom2k's surface conditions at each internal step, i=2..imm1,
  ! j=2..jmm1. Seamount: a wind stress tapered towards the boundaries,
  ! no heat or freshwater flux. Box: no wind; the fixed e_atmos and
  ! vfluxf of box, with inflow at the basin's T and S (tclim, sclim).
  implicit none
  integer, intent(in) :: iproblem, im, jm, kb
  real(8), intent(in) :: ramp, tbias, sbias
  real(8), intent(in) :: dvm(im,jm), t(im,jm,kb), s(im,jm,kb)
  real(8), intent(in) :: tclim(im,jm,kb), sclim(im,jm,kb)
  real(8), intent(inout), dimension(im,jm) :: wusurf, wvsurf, e_atmos, vfluxf, &
      wtsurf, swrad, wssurf
  real(8), intent(inout) :: w(im,jm,kb)
  real(8) :: pi, tatm, satm
  integer :: i, j, jmm1

  jmm1 = jm - 1
  pi = atan(1.d0)*4.d0
  do j = 2, jmm1
    do i = 2, im-1
      if (iproblem /= 2) then
        wusurf(i,j) = ramp*(1.d-4*cos(pi*(j-1)/jmm1)) &
                      *.25d0*(dvm(i,j+1) + dvm(i-1,j+1) + dvm(i-1,j) + dvm(i,j))
        wvsurf(i,j) = 0.d0
        e_atmos(i,j) = 0.d0
        vfluxf(i,j) = 0.d0
      end if
      ! flow across the surface: w(1) = vfluxf
      w(i,j,1) = vfluxf(i,j)
      wtsurf(i,j) = 0.d0
      swrad(i,j) = 0.d0
      ! heat and salt carried by the water crossing the surface
      if (iproblem == 2) then
        tatm = tclim(i,j,1) + tbias
        satm = sclim(i,j,1) + sbias
      else
        tatm = t(i,j,1) + tbias    ! an approximation, as pom2k
        satm = 0.d0
      end if
      wtsurf(i,j) = wtsurf(i,j) + vfluxf(i,j)*(tatm - t(i,j,1) - tbias)
      wssurf(i,j) = vfluxf(i,j)*(satm - s(i,j,1) - sbias)
    end do
  end do
end subroutine surface_forcing


subroutine smagorinsky(im, jm, kb, horcon, dx, dy, u, v, aam)
  ! pom2k's Smagorinsky lateral viscosity:
  ! aam = horcon*dx*dy*sqrt(ux**2 + vy**2 + .5*(uy + vx)**2)
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: horcon, dx(im,jm), dy(im,jm), u(im,jm,kb), v(im,jm,kb)
  real(8), intent(inout) :: aam(im,jm,kb)
  integer :: i, j, k

  do k = 1, kb-1
    do j = 2, jm-1
      do i = 2, im-1
        aam(i,j,k) = horcon*dx(i,j)*dy(i,j) &
                     *sqrt(((u(i+1,j,k) - u(i,j,k))/dx(i,j))**2 &
                           + ((v(i,j+1,k) - v(i,j,k))/dy(i,j))**2 &
                           + .5d0*(.25d0*(u(i,j+1,k) + u(i+1,j+1,k) &
                                          - u(i,j-1,k) - u(i+1,j-1,k))/dy(i,j) &
                                   + .25d0*(v(i+1,j,k) + v(i+1,j+1,k) &
                                            - v(i-1,j,k) - v(i-1,j+1,k))/dx(i,j))**2)
      end do
    end do
  end do
end subroutine smagorinsky


subroutine vertical_averages(im, jm, kb, mode, dz, advx, advy, drhox, drhoy, aam, &
                             d, ua, va, uab, vab, cbc, dx, dy, aru, arv, &
                             adx2d, ady2d, drx2d, dry2d, aam2d, advua, advva, &
                             fluxua, fluxva, wubot, wvbot, tps)
  ! pom2k: vertical integrals of the 3-D advection, baroclinic and
  ! viscosity terms for the external mode, minus the 2-D advection
  ! (advave), so that adx2d, ady2d carry the 3-D correction.
  implicit none
  integer, intent(in) :: im, jm, kb, mode
  real(8), intent(in) :: dz(kb)
  real(8), intent(in), dimension(im,jm,kb) :: advx, advy, drhox, drhoy, aam
  real(8), intent(in), dimension(im,jm) :: d, ua, va, uab, vab, cbc, dx, dy, aru, arv
  real(8), intent(inout), dimension(im,jm) :: adx2d, ady2d, drx2d, dry2d, aam2d, &
      advua, advva, fluxua, fluxva, wubot, wvbot, tps
  integer :: i, j, k

  do j = 1, jm
    do i = 1, im
      adx2d(i,j) = 0.d0
      ady2d(i,j) = 0.d0
      drx2d(i,j) = 0.d0
      dry2d(i,j) = 0.d0
      aam2d(i,j) = 0.d0
    end do
  end do
  do k = 1, kb-1
    do j = 1, jm
      do i = 1, im
        adx2d(i,j) = adx2d(i,j) + advx(i,j,k)*dz(k)
        ady2d(i,j) = ady2d(i,j) + advy(i,j,k)*dz(k)
        drx2d(i,j) = drx2d(i,j) + drhox(i,j,k)*dz(k)
        dry2d(i,j) = dry2d(i,j) + drhoy(i,j,k)*dz(k)
        aam2d(i,j) = aam2d(i,j) + aam(i,j,k)*dz(k)
      end do
    end do
  end do
  call advave(im, jm, mode, d, ua, va, uab, vab, aam2d, cbc, dx, dy, aru, arv, &
              advua, advva, fluxua, fluxva, wubot, wvbot, tps)
  do j = 1, jm
    do i = 1, im
      adx2d(i,j) = adx2d(i,j) - advua(i,j)
      ady2d(i,j) = ady2d(i,j) - advva(i,j)
    end do
  end do
end subroutine vertical_averages


subroutine external_step(iext, im, jm, kb, isplit, ispadv, mode, dte, grav, alpha, &
                         smoth, vmaxl, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
                         zz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                         aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, &
                         wubot, wvbot, e_atmos, vfluxf, &
                         ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                         tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                         u, v, t, s, q2, q2l, uf, vf, w, dt, &
                         el, elb, elf, ua, uab, uaf, va, vab, vaf, d, etf, egf, &
                         utf, vtf, advua, advva, fluxua, fluxva, tps, vamax, imax, jmax)
  ! One pass iext of pom2k's external (2-D) mode: continuity (elf),
  ! momentum (uaf, vaf) with the time-split filter, the velocity check
  ! (vamax at (imax, jmax)), the filter and the time-level shift, and
  ! the sums egf, utf, vtf for the internal mode. etf collects elf over
  ! the last three passes.
  implicit none
  integer, intent(in) :: iext, im, jm, kb, isplit, ispadv, mode
  real(8), intent(in) :: dte, grav, alpha, smoth, vmaxl, dti, hmax, small, ramp
  real(8), intent(in) :: rfe, rfw, rfn, rfs, zz(kb)
  real(8), intent(in), dimension(im,jm) :: h, dx, dy, art, aru, arv, cor, fsm, dum, &
      dvm, cbc, aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, e_atmos, vfluxf, dt
  real(8), intent(inout) :: wubot(im,jm), wvbot(im,jm)
  real(8), intent(in) :: ele(jm), elw(jm), eln(im), els(im)
  real(8), intent(in) :: uabe(jm), uabw(jm), vabn(im), vabs(im)
  real(8), intent(in) :: tbe(jm,kb), tbw(jm,kb), tbn(im,kb), tbs(im,kb)
  real(8), intent(in) :: sbe(jm,kb), sbw(jm,kb), sbn(im,kb), sbs(im,kb)
  real(8), intent(in), dimension(im,jm,kb) :: u, v, t, s, q2, q2l
  real(8), intent(inout), dimension(im,jm,kb) :: uf, vf, w
  real(8), intent(inout), dimension(im,jm) :: el, elb, elf, ua, uab, uaf, va, vab, &
      vaf, d, etf, egf, utf, vtf, advua, advva, fluxua, fluxva, tps
  real(8), intent(out) :: vamax
  integer, intent(out) :: imax, jmax
  real(8) :: dte2, ispi, isp2i
  integer :: i, j, imm1, jmm1

  imm1 = im - 1
  jmm1 = jm - 1
  dte2 = dte*2
  ispi = 1.d0/dble(isplit)
  isp2i = 1.d0/(2.d0*dble(isplit))

  do j = 2, jm
    do i = 2, im
      fluxua(i,j) = .25d0*(d(i,j) + d(i-1,j))*(dy(i,j) + dy(i-1,j))*ua(i,j)
      fluxva(i,j) = .25d0*(d(i,j) + d(i,j-1))*(dx(i,j) + dx(i,j-1))*va(i,j)
    end do
  end do
  ! continuity, with the surface freshwater flux w(1) = vfluxf
  do j = 2, jmm1
    do i = 2, imm1
      elf(i,j) = elb(i,j) + dte2*(-(fluxua(i+1,j) - fluxua(i,j) + fluxva(i,j+1) - fluxva(i,j)) &
                                  /art(i,j) - vfluxf(i,j))
    end do
  end do
  call bcond(1, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
             zz, h, dx, dy, dt, fsm, dum, dvm, el, u, v, t, s, q2, q2l, &
             ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
             sbe, sbw, sbn, sbs, elf, uaf, vaf, uf, vf, w)
  if (mod(iext, ispadv) == 0) &
    call advave(im, jm, mode, d, ua, va, uab, vab, aam2d, cbc, dx, dy, aru, arv, &
                advua, advva, fluxua, fluxva, wubot, wvbot, tps)
  do j = 2, jmm1
    do i = 2, im
      uaf(i,j) = adx2d(i,j) + advua(i,j) &
                 - aru(i,j)*.25d0*(cor(i,j)*d(i,j)*(va(i,j+1) + va(i,j)) &
                                   + cor(i-1,j)*d(i-1,j)*(va(i-1,j+1) + va(i-1,j))) &
                 + .25d0*grav*(dy(i,j) + dy(i-1,j))*(d(i,j) + d(i-1,j)) &
                   *((1.d0 - 2.d0*alpha)*(el(i,j) - el(i-1,j)) &
                     + alpha*(elb(i,j) - elb(i-1,j) + elf(i,j) - elf(i-1,j)) &
                     + e_atmos(i,j) - e_atmos(i-1,j)) &
                 + drx2d(i,j) + aru(i,j)*(wusurf(i,j) - wubot(i,j))
    end do
  end do
  do j = 2, jmm1
    do i = 2, im
      uaf(i,j) = ((h(i,j) + elb(i,j) + h(i-1,j) + elb(i-1,j))*aru(i,j)*uab(i,j) &
                  - 4.d0*dte*uaf(i,j)) &
                 /((h(i,j) + elf(i,j) + h(i-1,j) + elf(i-1,j))*aru(i,j))
    end do
  end do
  do j = 2, jm
    do i = 2, imm1
      vaf(i,j) = ady2d(i,j) + advva(i,j) &
                 + arv(i,j)*.25d0*(cor(i,j)*d(i,j)*(ua(i+1,j) + ua(i,j)) &
                                   + cor(i,j-1)*d(i,j-1)*(ua(i+1,j-1) + ua(i,j-1))) &
                 + .25d0*grav*(dx(i,j) + dx(i,j-1))*(d(i,j) + d(i,j-1)) &
                   *((1.d0 - 2.d0*alpha)*(el(i,j) - el(i,j-1)) &
                     + alpha*(elb(i,j) - elb(i,j-1) + elf(i,j) - elf(i,j-1)) &
                     + e_atmos(i,j) - e_atmos(i,j-1)) &
                 + dry2d(i,j) + arv(i,j)*(wvsurf(i,j) - wvbot(i,j))
    end do
  end do
  do j = 2, jm
    do i = 2, imm1
      vaf(i,j) = ((h(i,j) + elb(i,j) + h(i,j-1) + elb(i,j-1))*vab(i,j)*arv(i,j) &
                  - 4.d0*dte*vaf(i,j)) &
                 /((h(i,j) + elf(i,j) + h(i,j-1) + elf(i,j-1))*arv(i,j))
    end do
  end do
  call bcond(2, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
             zz, h, dx, dy, dt, fsm, dum, dvm, el, u, v, t, s, q2, q2l, &
             ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
             sbe, sbw, sbn, sbs, elf, uaf, vaf, uf, vf, w)
  ! etf: filtered elevation over the last three passes
  if (iext == (isplit-2)) then
    do j = 1, jm
      do i = 1, im
        etf(i,j) = .25d0*smoth*elf(i,j)
      end do
    end do
  else if (iext == (isplit-1)) then
    do j = 1, jm
      do i = 1, im
        etf(i,j) = etf(i,j) + .5d0*(1.d0 - .5d0*smoth)*elf(i,j)
      end do
    end do
  else if (iext == isplit) then
    do j = 1, jm
      do i = 1, im
        etf(i,j) = (etf(i,j) + .5d0*elf(i,j))*fsm(i,j)
      end do
    end do
  end if
  ! velocity check (generally the CFL criterion)
  vamax = 0.d0
  imax = 1
  jmax = 1
  do j = 1, jm
    do i = 1, im
      if (abs(vaf(i,j)) >= vamax) then
        vamax = abs(vaf(i,j))
        imax = i
        jmax = j
      end if
    end do
  end do
  if (vamax <= vmaxl) then
    ! filter to remove the time split, then shift the time levels
    do j = 1, jm
      do i = 1, im
        ua(i,j) = ua(i,j) + .5d0*smoth*(uab(i,j) - 2.d0*ua(i,j) + uaf(i,j))
        va(i,j) = va(i,j) + .5d0*smoth*(vab(i,j) - 2.d0*va(i,j) + vaf(i,j))
        el(i,j) = el(i,j) + .5d0*smoth*(elb(i,j) - 2.d0*el(i,j) + elf(i,j))
        elb(i,j) = el(i,j)
        el(i,j) = elf(i,j)
        d(i,j) = h(i,j) + el(i,j)
        uab(i,j) = ua(i,j)
        ua(i,j) = uaf(i,j)
        vab(i,j) = va(i,j)
        va(i,j) = vaf(i,j)
      end do
    end do
    if (iext /= isplit) then
      do j = 1, jm
        do i = 1, im
          egf(i,j) = egf(i,j) + el(i,j)*ispi
        end do
      end do
      do j = 1, jm
        do i = 2, im
          utf(i,j) = utf(i,j) + ua(i,j)*(d(i,j) + d(i-1,j))*isp2i
        end do
      end do
      do j = 2, jm
        do i = 1, im
          vtf(i,j) = vtf(i,j) + va(i,j)*(d(i,j) + d(i,j-1))*isp2i
        end do
      end do
    end if
  end if
end subroutine external_step


subroutine internal_step(im, jm, kb, mode, nadv, nitera, sw, dti, grav, umol, kappa, &
                         small, rhoref, tbias, sbias, tprni, smoth, hmax, ramp, &
                         rfe, rfw, rfn, rfs, ntp, nbct, nbcs, &
                         z, zz, dz, dzz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, &
                         cbc, ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                         tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                         dt, etb, etf, egf, egb, e_atmos, utb, utf, vtb, vtf, &
                         vfluxb, vfluxf, wusurf, wvsurf, wtsurf, wssurf, swrad, &
                         tsurf, ssurf, wubot, wvbot, tps, &
                         u, ub, uf, v, vb, vf, w, t, tb, s, sb, rho, rmean, tclim, sclim, &
                         q2, q2b, q2l, q2lb, l, km, kh, kq, aam, advx, advy, &
                         drhox, drhoy, a, c, ee, gg, dtef, zflux)
  ! pom2k's internal (3-D) mode: adjust u, v to the external transports,
  ! w, turbulence (q2, q2l), temperature and salinity (unless mode 4),
  ! density and momentum, each with its Asselin filter and time shift.
  implicit none
  integer, intent(in) :: im, jm, kb, mode, nadv, nitera, ntp, nbct, nbcs
  real(8), intent(in) :: sw, dti, grav, umol, kappa, small, rhoref, tbias, sbias
  real(8), intent(in) :: tprni, smoth, hmax, ramp, rfe, rfw, rfn, rfs
  real(8), intent(in) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(in), dimension(im,jm) :: h, dx, dy, art, aru, arv, cor, fsm, dum, &
      dvm, cbc, dt, etb, etf, egf, egb, e_atmos, utb, utf, vtb, vtf, vfluxb, vfluxf, &
      wusurf, wvsurf, wtsurf, wssurf, swrad, tsurf, ssurf
  real(8), intent(in) :: ele(jm), elw(jm), eln(im), els(im)
  real(8), intent(in) :: uabe(jm), uabw(jm), vabn(im), vabs(im)
  real(8), intent(in) :: tbe(jm,kb), tbw(jm,kb), tbn(im,kb), tbs(im,kb)
  real(8), intent(in) :: sbe(jm,kb), sbw(jm,kb), sbn(im,kb), sbs(im,kb)
  real(8), intent(in), dimension(im,jm,kb) :: rmean, tclim, sclim, aam, advx, advy, &
      drhox, drhoy
  real(8), intent(inout), dimension(im,jm) :: wubot, wvbot, tps
  real(8), intent(inout), dimension(im,jm,kb) :: u, ub, uf, v, vb, vf, w, t, tb, s, &
      sb, rho, q2, q2b, q2l, q2lb, l, km, kh, kq, a, c, ee, gg, dtef, zflux
  real(8) :: dti2, elfdum(im,jm), uafdum(im,jm), vafdum(im,jm)
  integer :: i, j, k, kbm1

  kbm1 = kb - 1
  dti2 = dti*2
  ! adjust u(z), v(z) so that their depth averages are the external ones
  do j = 1, jm
    do i = 1, im
      tps(i,j) = 0.d0
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tps(i,j) = tps(i,j) + u(i,j,k)*dz(k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 2, im
        u(i,j,k) = (u(i,j,k) - tps(i,j)) + (utb(i,j) + utf(i,j))/(dt(i,j) + dt(i-1,j))
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      tps(i,j) = 0.d0
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tps(i,j) = tps(i,j) + v(i,j,k)*dz(k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 2, jm
      do i = 1, im
        v(i,j,k) = (v(i,j,k) - tps(i,j)) + (vtb(i,j) + vtf(i,j))/(dt(i,j) + dt(i,j-1))
      end do
    end do
  end do

  call vertvl(im, jm, kb, dti2, dz, u, v, dt, dx, dy, etf, etb, vfluxb, vfluxf, w, a, c)
  ! bcond 3-6 read none of its external-mode arguments (el, elf, uaf, vaf)
  call bcond(5, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
             zz, h, dx, dy, dt, fsm, dum, dvm, etf, u, v, t, s, q2, q2l, &
             ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
             sbe, sbw, sbn, sbs, elfdum, uafdum, vafdum, uf, vf, w)
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        uf(i,j,k) = 0.d0
        vf(i,j,k) = 0.d0
      end do
    end do
  end do

  ! turbulence: q2f in uf, q2lf in vf
  call advq(im, jm, kb, dti2, dz, u, v, w, aam, dt, h, etb, etf, dx, dy, art, dum, dvm, &
            q2b, q2, uf, a, c)
  call advq(im, jm, kb, dti2, dz, u, v, w, aam, dt, h, etb, etf, dx, dy, art, dum, dvm, &
            q2lb, q2l, vf, a, c)
  call profq(im, jm, kb, dti2, umol, grav, rhoref, kappa, small, tbias, sbias, &
             z, zz, dz, dzz, h, dt, etf, fsm, wusurf, wvsurf, wubot, wvbot, &
             u, v, t, s, rho, q2, q2b, q2lb, l, km, kh, kq, ee, gg, uf, vf, &
             a, c, tps, dtef)
  call bcond(6, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
             zz, h, dx, dy, dt, fsm, dum, dvm, etf, u, v, t, s, q2, q2l, &
             ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
             sbe, sbw, sbn, sbs, elfdum, uafdum, vafdum, uf, vf, w)
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        q2(i,j,k) = q2(i,j,k) + .5d0*smoth*(uf(i,j,k) + q2b(i,j,k) - 2.d0*q2(i,j,k))
        q2l(i,j,k) = q2l(i,j,k) + .5d0*smoth*(vf(i,j,k) + q2lb(i,j,k) - 2.d0*q2l(i,j,k))
        q2b(i,j,k) = q2(i,j,k)
        q2(i,j,k) = uf(i,j,k)
        q2lb(i,j,k) = q2l(i,j,k)
        q2l(i,j,k) = vf(i,j,k)
      end do
    end do
  end do

  ! temperature (tf in uf) and salinity (sf in vf)
  if (mode /= 4) then
    if (nadv == 1) then
      call advt1(im, jm, kb, dti2, tprni, dz, u, v, w, aam, dt, h, etb, etf, &
                 dx, dy, art, dum, dvm, tb, t, tclim, uf, a, c, zflux)
      call advt1(im, jm, kb, dti2, tprni, dz, u, v, w, aam, dt, h, etb, etf, &
                 dx, dy, art, dum, dvm, sb, s, sclim, vf, a, c, zflux)
    else
      call advt2(im, jm, kb, dti2, tprni, dz, dzz, u, v, w, aam, dt, h, etb, etf, &
                 dx, dy, art, aru, arv, fsm, dum, dvm, tb, t, tclim, uf, &
                 a, c, zflux, nitera, sw)
      call advt2(im, jm, kb, dti2, tprni, dz, dzz, u, v, w, aam, dt, h, etb, etf, &
                 dx, dy, art, aru, arv, fsm, dum, dvm, sb, s, sclim, vf, &
                 a, c, zflux, nitera, sw)
    end if
    call proft(im, jm, kb, dti2, umol, ntp, z, dz, dzz, h, etf, swrad, kh, &
               a, c, ee, gg, uf, wtsurf, tsurf, nbct, tps)
    call proft(im, jm, kb, dti2, umol, ntp, z, dz, dzz, h, etf, swrad, kh, &
               a, c, ee, gg, vf, wssurf, ssurf, nbcs, tps)
    call bcond(4, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
               zz, h, dx, dy, dt, fsm, dum, dvm, etf, u, v, t, s, q2, q2l, &
               ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
               sbe, sbw, sbn, sbs, elfdum, uafdum, vafdum, uf, vf, w)
    do k = 1, kb
      do j = 1, jm
        do i = 1, im
          t(i,j,k) = t(i,j,k) + .5d0*smoth*(uf(i,j,k) + tb(i,j,k) - 2.d0*t(i,j,k))
          s(i,j,k) = s(i,j,k) + .5d0*smoth*(vf(i,j,k) + sb(i,j,k) - 2.d0*s(i,j,k))
          tb(i,j,k) = t(i,j,k)
          t(i,j,k) = uf(i,j,k)
          sb(i,j,k) = s(i,j,k)
          s(i,j,k) = vf(i,j,k)
        end do
      end do
    end do
    call dens(im, jm, kb, grav, rhoref, tbias, sbias, zz, h, fsm, s, t, rho)
  end if

  ! momentum (uf, vf)
  call advu(im, jm, kb, grav, dti2, dz, u, v, w, ub, advx, drhox, dt, h, etb, etf, &
            egf, egb, e_atmos, cor, dy, aru, uf)
  call advv(im, jm, kb, grav, dti2, dz, u, v, w, vb, advy, drhoy, dt, h, etb, etf, &
            egf, egb, e_atmos, cor, dx, arv, vf)
  call profu(im, jm, kb, dti2, umol, dz, dzz, h, etf, km, cbc, dum, wusurf, ub, vb, &
             a, c, ee, gg, tps, uf, wubot)
  call profv(im, jm, kb, dti2, umol, dz, dzz, h, etf, km, cbc, dvm, wvsurf, ub, vb, &
             a, c, ee, gg, tps, vf, wvbot)
  call bcond(3, im, jm, kb, grav, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
             zz, h, dx, dy, dt, fsm, dum, dvm, etf, u, v, t, s, q2, q2l, &
             ele, elw, eln, els, uabe, uabw, vabn, vabs, tbe, tbw, tbn, tbs, &
             sbe, sbw, sbn, sbs, elfdum, uafdum, vafdum, uf, vf, w)
  ! filter with the depth-mean of the filter increment removed
  do j = 1, jm
    do i = 1, im
      tps(i,j) = 0.d0
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tps(i,j) = tps(i,j) + (uf(i,j,k) + ub(i,j,k) - 2.d0*u(i,j,k))*dz(k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        u(i,j,k) = u(i,j,k) + .5d0*smoth*(uf(i,j,k) + ub(i,j,k) - 2.d0*u(i,j,k) - tps(i,j))
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      tps(i,j) = 0.d0
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tps(i,j) = tps(i,j) + (vf(i,j,k) + vb(i,j,k) - 2.d0*v(i,j,k))*dz(k)
      end do
    end do
  end do
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        v(i,j,k) = v(i,j,k) + .5d0*smoth*(vf(i,j,k) + vb(i,j,k) - 2.d0*v(i,j,k) - tps(i,j))
      end do
    end do
  end do
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        ub(i,j,k) = u(i,j,k)
        u(i,j,k) = uf(i,j,k)
        vb(i,j,k) = v(i,j,k)
        v(i,j,k) = vf(i,j,k)
      end do
    end do
  end do
end subroutine internal_step


subroutine external_mode(im, jm, kb, isplit, ispadv, mode, dte, grav, alpha, &
                         smoth, vmaxl, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
                         zz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                         aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, &
                         wubot, wvbot, e_atmos, vfluxf, &
                         ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                         tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                         u, v, t, s, q2, q2l, uf, vf, w, dt, &
                         el, elb, elf, ua, uab, uaf, va, vab, vaf, d, etf, egf, &
                         utf, vtf, advua, advva, fluxua, fluxva, tps, vamax, imax, jmax)
  ! pom2k's split-explicit external mode of one internal step (the twin of
  ! SplitExplicit.external_mode): the sums egf, utf, vtf from time level n,
  ! then isplit passes of external_step; vamax, imax, jmax the last pass's.
  implicit none
  integer, intent(in) :: im, jm, kb, isplit, ispadv, mode
  real(8), intent(in) :: dte, grav, alpha, smoth, vmaxl, dti, hmax, small, ramp
  real(8), intent(in) :: rfe, rfw, rfn, rfs, zz(kb)
  real(8), intent(in), dimension(im,jm) :: h, dx, dy, art, aru, arv, cor, fsm, dum, &
      dvm, cbc, aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, e_atmos, vfluxf, dt
  real(8), intent(inout) :: wubot(im,jm), wvbot(im,jm)
  real(8), intent(in) :: ele(jm), elw(jm), eln(im), els(im)
  real(8), intent(in) :: uabe(jm), uabw(jm), vabn(im), vabs(im)
  real(8), intent(in) :: tbe(jm,kb), tbw(jm,kb), tbn(im,kb), tbs(im,kb)
  real(8), intent(in) :: sbe(jm,kb), sbw(jm,kb), sbn(im,kb), sbs(im,kb)
  real(8), intent(in), dimension(im,jm,kb) :: u, v, t, s, q2, q2l
  real(8), intent(inout), dimension(im,jm,kb) :: uf, vf, w
  real(8), intent(inout), dimension(im,jm) :: el, elb, elf, ua, uab, uaf, va, vab, &
      vaf, d, etf, egf, utf, vtf, advua, advva, fluxua, fluxva, tps
  real(8), intent(out) :: vamax
  integer, intent(out) :: imax, jmax
  real(8) :: ispi, isp2i
  integer :: i, j, iext

  ispi = 1.d0/dble(isplit)
  isp2i = 1.d0/(2.d0*dble(isplit))
  do j = 1, jm
    do i = 1, im
      egf(i,j) = el(i,j)*ispi
    end do
  end do
  do j = 1, jm
    do i = 2, im
      utf(i,j) = ua(i,j)*(d(i,j) + d(i-1,j))*isp2i
    end do
  end do
  do j = 2, jm
    do i = 1, im
      vtf(i,j) = va(i,j)*(d(i,j) + d(i,j-1))*isp2i
    end do
  end do
  do iext = 1, isplit
    call external_step(iext, im, jm, kb, isplit, ispadv, mode, dte, grav, alpha, &
                       smoth, vmaxl, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
                       zz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                       aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, &
                       wubot, wvbot, e_atmos, vfluxf, &
                       ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                       tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                       u, v, t, s, q2, q2l, uf, vf, w, dt, &
                       el, elb, elf, ua, uab, uaf, va, vab, vaf, d, etf, egf, &
                       utf, vtf, advua, advva, fluxua, fluxva, tps, vamax, imax, jmax)
  end do
end subroutine external_mode


subroutine run_steps(iint_first, iint_last, time0, scheme, iproblem, mode, nadv, nitera, &
                     sw, isplit, ispadv, dte, grav, umol, kappa, small, rhoref, tbias, sbias, &
                     tprni, horcon, smoth, alpha, vmaxl, hmax, lramp, ntp, nbct, nbcs, &
                     rfe, rfw, rfn, rfs, theta, cg_tol, cg_maxiter, im, jm, kb, &
                     z, zz, dz, dzz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                     ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                     tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                     el, elb, elf, et, etb, etf, egf, egb, d, dt, ua, uab, uaf, &
                     va, vab, vaf, utb, utf, vtb, vtf, adx2d, ady2d, drx2d, dry2d, aam2d, &
                     advua, advva, fluxua, fluxva, wubot, wvbot, wusurf, wvsurf, wtsurf, &
                     wssurf, swrad, vfluxf, vfluxb, e_atmos, tps, tsurf, ssurf, &
                     u, ub, uf, v, vb, vf, w, t, tb, s, sb, rho, rmean, tclim, sclim, &
                     q2, q2b, q2l, q2lb, l, km, kh, kq, aam, advx, advy, drhox, drhoy, &
                     a, c, ee, gg, dtef, zflux, iint_done, vamax, imax, jmax, &
                     cg_residual, cg_iters, cg_iters_total, stopped)
  ! pom2k's main loop for iint = iint_first..iint_last, model time
  ! dti*iint/86400 + time0 days, with the external mode of ``scheme``:
  ! 1 pom2k's mode split (external_mode: isplit passes of dte), 2 the
  ! semi-implicit free surface (implicit.f90: one implicit_step of dti =
  ! dte*isplit, solved by conjugate gradients to cg_tol). As pom2k, the
  ! internal mode is skipped at iint=1 of a cold start (time0=0) and in
  ! mode 2. Stops after the first step whose velocity check fails (vamax >
  ! vmaxl: stopped = 1) or else, with scheme 2, whose solver missed cg_tol
  ! (stopped = 2: not cg_residual <= cg_tol*(1 + 1e-9), NaN included; the
  ! slack as the torch core's, since the solver stops on |r|**2 <= tol**2
  ! |b|**2 and |r|/|b| may round a few ulps past tol), the state left as
  ! that step's external mode left it; stopped = 0 when every step passed.
  ! iint_done is the last step taken, vamax, imax, jmax (and with scheme
  ! 2 cg_residual, cg_iters) its checks, cg_iters_total the iterations of
  ! all steps taken. theta, cg_tol, cg_maxiter are read by scheme 2 only,
  ! ispadv and alpha by scheme 1 only.
  implicit none
  integer, intent(in) :: iint_first, iint_last, scheme, iproblem, mode, nadv, nitera
  integer, intent(in) :: isplit, ispadv, lramp, ntp, nbct, nbcs, cg_maxiter, im, jm, kb
  real(8), intent(in) :: time0, sw, dte, grav, umol, kappa, small, rhoref, tbias, sbias
  real(8), intent(in) :: tprni, horcon, smoth, alpha, vmaxl, hmax, rfe, rfw, rfn, rfs
  real(8), intent(in) :: theta, cg_tol
  real(8), intent(in) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(in), dimension(im,jm) :: h, dx, dy, art, aru, arv, cor, fsm, dum, &
      dvm, cbc
  real(8), intent(in) :: ele(jm), elw(jm), eln(im), els(im)
  real(8), intent(in) :: uabe(jm), uabw(jm), vabn(im), vabs(im)
  real(8), intent(in) :: tbe(jm,kb), tbw(jm,kb), tbn(im,kb), tbs(im,kb)
  real(8), intent(in) :: sbe(jm,kb), sbw(jm,kb), sbn(im,kb), sbs(im,kb)
  real(8), intent(in), dimension(im,jm,kb) :: rmean, tclim, sclim
  real(8), intent(inout), dimension(im,jm) :: el, elb, elf, et, etb, etf, egf, egb, &
      d, dt, ua, uab, uaf, va, vab, vaf, utb, utf, vtb, vtf, adx2d, ady2d, drx2d, &
      dry2d, aam2d, advua, advva, fluxua, fluxva, wubot, wvbot, wusurf, wvsurf, &
      wtsurf, wssurf, swrad, vfluxf, vfluxb, e_atmos, tps, tsurf, ssurf
  real(8), intent(inout), dimension(im,jm,kb) :: u, ub, uf, v, vb, vf, w, t, tb, s, sb, &
      rho, q2, q2b, q2l, q2lb, l, km, kh, kq, aam, advx, advy, drhox, drhoy, &
      a, c, ee, gg, dtef, zflux
  integer, intent(out) :: iint_done, imax, jmax, cg_iters, cg_iters_total, stopped
  real(8), intent(out) :: vamax, cg_residual
  real(8), parameter :: slack = 1.d0 + 1.d-9
  real(8) :: pi, period, dti, time, ramp
  integer :: i, j, iint

  pi = atan(1.d0)*4.d0
  dti = dte*dble(isplit)
  ! inertial period for the ramp
  period = (2.d0*pi)/abs(cor(im/2,jm/2))/86400.d0
  iint_done = iint_first - 1
  vamax = 0.d0
  imax = 0
  jmax = 0
  cg_residual = 0.d0
  cg_iters = 0
  cg_iters_total = 0
  stopped = 0

  do iint = iint_first, iint_last
    time = dti*dble(iint)/86400.d0 + time0
    if (lramp /= 0) then
      ramp = time/period
      if (ramp > 1.d0) ramp = 1.d0
    else
      ramp = 1.d0
    end if
    call surface_forcing(iproblem, im, jm, kb, ramp, tbias, sbias, dvm, t, s, &
                         tclim, sclim, wusurf, wvsurf, e_atmos, vfluxf, w, &
                         wtsurf, swrad, wssurf)
    ! 3-D terms of the external mode; in mode 2 the initial aam2d is kept
    if (mode /= 2) then
      call advct(im, jm, kb, u, v, ub, vb, dt, aam, dx, dy, aru, arv, &
                 advx, advy, a, c, ee)
      call baropg(im, jm, kb, grav, zz, dx, dy, dt, dum, dvm, rmean, rho, drhox, drhoy)
      call smagorinsky(im, jm, kb, horcon, dx, dy, u, v, aam)
      call vertical_averages(im, jm, kb, mode, dz, advx, advy, drhox, drhoy, aam, &
                             d, ua, va, uab, vab, cbc, dx, dy, aru, arv, &
                             adx2d, ady2d, drx2d, dry2d, aam2d, advua, advva, &
                             fluxua, fluxva, wubot, wvbot, tps)
    end if
    if (scheme == 1) then
      call external_mode(im, jm, kb, isplit, ispadv, mode, dte, grav, alpha, &
                         smoth, vmaxl, dti, hmax, small, ramp, rfe, rfw, rfn, rfs, &
                         zz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                         aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, &
                         wubot, wvbot, e_atmos, vfluxf, &
                         ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                         tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                         u, v, t, s, q2, q2l, uf, vf, w, dt, &
                         el, elb, elf, ua, uab, uaf, va, vab, vaf, d, etf, egf, &
                         utf, vtf, advua, advva, fluxua, fluxva, tps, vamax, imax, jmax)
    else
      call implicit_step(im, jm, kb, mode, theta, dti, grav, hmax, small, ramp, &
                         rfe, rfw, rfn, rfs, cg_tol, cg_maxiter, &
                         zz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, cbc, &
                         aam2d, adx2d, ady2d, drx2d, dry2d, wusurf, wvsurf, &
                         wubot, wvbot, e_atmos, vfluxf, &
                         ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                         tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                         u, v, t, s, q2, q2l, uf, vf, w, dt, &
                         el, elb, elf, ua, uab, uaf, va, vab, vaf, d, etf, egf, &
                         utf, vtf, advua, advva, fluxua, fluxva, tps, &
                         vamax, imax, jmax, cg_residual, cg_iters)
      cg_iters_total = cg_iters_total + cg_iters
    end if
    if (vamax > vmaxl) then
      stopped = 1
    else if (scheme == 2 .and. .not. (cg_residual <= cg_tol*slack)) then
      stopped = 2
    end if
    if (stopped == 0) then
      if ((iint /= 1 .or. time0 /= 0.d0) .and. mode /= 2) then
        call internal_step(im, jm, kb, mode, nadv, nitera, sw, dti, grav, umol, kappa, &
                           small, rhoref, tbias, sbias, tprni, smoth, hmax, ramp, &
                           rfe, rfw, rfn, rfs, ntp, nbct, nbcs, &
                           z, zz, dz, dzz, h, dx, dy, art, aru, arv, cor, fsm, dum, dvm, &
                           cbc, ele, elw, eln, els, uabe, uabw, vabn, vabs, &
                           tbe, tbw, tbn, tbs, sbe, sbw, sbn, sbs, &
                           dt, etb, etf, egf, egb, e_atmos, utb, utf, vtb, vtf, &
                           vfluxb, vfluxf, wusurf, wvsurf, wtsurf, wssurf, swrad, &
                           tsurf, ssurf, wubot, wvbot, tps, &
                           u, ub, uf, v, vb, vf, w, t, tb, s, sb, rho, rmean, tclim, sclim, &
                           q2, q2b, q2l, q2lb, l, km, kh, kq, aam, advx, advy, &
                           drhox, drhoy, a, c, ee, gg, dtef, zflux)
      end if
      do j = 1, jm
        do i = 1, im
          egb(i,j) = egf(i,j)
          etb(i,j) = et(i,j)
          et(i,j) = etf(i,j)
          dt(i,j) = h(i,j) + et(i,j)
          utb(i,j) = utf(i,j)
          vtb(i,j) = vtf(i,j)
          vfluxb(i,j) = vfluxf(i,j)
        end do
      end do
    end if
    iint_done = iint
    if (stopped /= 0) return
  end do
end subroutine run_steps
