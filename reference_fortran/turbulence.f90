! pompy Fortran oracle: Mellor-Yamada 2.5 turbulence closure.

subroutine profq(im, jm, kb, dti2, umol, grav, rhoref, kappa, small, tbias, sbias, &
                 z, zz, dz, dzz, h, dt, etf, fsm, wusurf, wvsurf, wubot, wvbot, &
                 u, v, t, s, rho, q2, q2b, q2lb, l, km, kh, kq, ee, gg, uf, vf, &
                 a, c, dh, dtef)
  ! pom2k profq: vertical diffusion of q2 (into uf) and q2l (into vf)
  ! and the mixing coefficients km, kh, kq. Called as profq(a,c,tps,dtef):
  ! pom2k's dummies sm, sh, cc alias the common a, c, dtef, so here sm
  ! is written a, sh is c and cc (sound speed) is dtef, in pom2k's order.
  implicit none
  integer, intent(in) :: im, jm, kb
  real(8), intent(in) :: dti2, umol, grav, rhoref, kappa, small, tbias, sbias
  real(8), intent(in) :: z(kb), zz(kb), dz(kb), dzz(kb)
  real(8), intent(in) :: h(im,jm), dt(im,jm), etf(im,jm), fsm(im,jm)
  real(8), intent(in) :: wusurf(im,jm), wvsurf(im,jm), wubot(im,jm), wvbot(im,jm)
  real(8), intent(in) :: u(im,jm,kb), v(im,jm,kb), t(im,jm,kb), s(im,jm,kb), rho(im,jm,kb)
  real(8), intent(in) :: q2(im,jm,kb)
  real(8), intent(inout) :: q2b(im,jm,kb), q2lb(im,jm,kb), l(im,jm,kb)
  real(8), intent(inout) :: km(im,jm,kb), kh(im,jm,kb), kq(im,jm,kb)
  real(8), intent(inout) :: ee(im,jm,kb), gg(im,jm,kb), uf(im,jm,kb), vf(im,jm,kb)
  real(8), intent(inout) :: a(im,jm,kb), c(im,jm,kb), dh(im,jm), dtef(im,jm,kb)
  real(8) :: gh(im,jm,kb), boygr(im,jm,kb), stf(im,jm,kb), prod(im,jm,kb), l0(im,jm)
  real(8) :: a1, a2, b1, b2, c1, e1, e2, sef, cbcnst, surfl, shiw
  real(8) :: coef1, coef2, coef3, coef4, coef5, const1, ghc, p, sp, tp, utau2
  integer :: i, j, k, ki, imm1, jmm1, kbm1

  a1 = 0.92d0
  b1 = 16.6d0
  a2 = 0.74d0
  b2 = 10.1d0
  c1 = 0.08d0
  e1 = 1.8d0
  e2 = 1.33d0
  sef = 1.d0
  cbcnst = 100.d0
  surfl = 2.d5
  shiw = 0.d0
  imm1 = im - 1
  jmm1 = jm - 1
  kbm1 = kb - 1

  do j = 1, jm
    do i = 1, im
      dh(i,j) = h(i,j) + etf(i,j)
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        a(i,j,k) = -dti2*(kq(i,j,k+1) + kq(i,j,k) + 2.d0*umol)*.5d0 &
                   /(dzz(k-1)*dz(k)*dh(i,j)*dh(i,j))
        c(i,j,k) = -dti2*(kq(i,j,k-1) + kq(i,j,k) + 2.d0*umol)*.5d0 &
                   /(dzz(k-1)*dz(k-1)*dh(i,j)*dh(i,j))
      end do
    end do
  end do

  ! q2 equation:  dti2*(kq*q2')' - q2*(2.*dti2*dtef+1.) = -q2b
  const1 = (16.6d0**(2.d0/3.d0))*sef
  do i = 1, im
    ee(i,jm,1) = 0.d0
    gg(i,jm,1) = 0.d0
    l0(i,jm) = 0.d0
  end do
  do j = 1, jm
    ee(im,j,1) = 0.d0
    gg(im,j,1) = 0.d0
    l0(im,j) = 0.d0
  end do
  do i = 1, im
    do j = 1, jm
      do k = 2, kbm1
        prod(i,j,k) = 0.d0
      end do
    end do
  end do
  do j = 1, jmm1
    do i = 1, imm1
      utau2 = sqrt((.5d0*(wusurf(i,j) + wusurf(i+1,j)))**2 &
                   + (.5d0*(wvsurf(i,j) + wvsurf(i,j+1)))**2)
      ! wave breaking energy, a variant of Craig & Banner (1994)
      ee(i,j,1) = 0.d0
      gg(i,j,1) = (15.8d0*cbcnst)**(2.d0/3.d0)*utau2
      ! surface length scale following Stacey (1999)
      l0(i,j) = surfl*utau2/grav
      uf(i,j,kb) = sqrt((.5d0*(wubot(i,j) + wubot(i+1,j)))**2 &
                        + (.5d0*(wvbot(i,j) + wvbot(i,j+1)))**2)*const1
    end do
  end do
  ! speed of sound (cc, stored in dtef)
  do k = 1, kbm1
    do j = 1, jm
      do i = 1, im
        tp = t(i,j,k) + tbias
        sp = s(i,j,k) + sbias
        ! pressure in decibars
        p = grav*rhoref*(-zz(k)*h(i,j))*1.d-4
        dtef(i,j,k) = 1449.1d0 + .00821d0*p + 4.55d0*tp - .045d0*tp**2 + 1.34d0*(sp - 35.0d0)
        dtef(i,j,k) = dtef(i,j,k)/sqrt((1.d0 - .01642d0*p/dtef(i,j,k)) &
                                       *(1.d0 - 0.40d0*p/dtef(i,j,k)**2))
      end do
    end do
  end do
  ! buoyancy gradient
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        q2b(i,j,k) = abs(q2b(i,j,k))
        q2lb(i,j,k) = abs(q2lb(i,j,k))
        boygr(i,j,k) = grav*(rho(i,j,k-1) - rho(i,j,k))/(dzz(k-1)*h(i,j)) &
                       + (grav**2)*2.d0/(dtef(i,j,k-1)**2 + dtef(i,j,k)**2)
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        l(i,j,k) = abs(q2lb(i,j,k)/q2b(i,j,k))
        if (z(k) > -0.5d0) l(i,j,k) = max(l(i,j,k), kappa*l0(i,j))
        gh(i,j,k) = (l(i,j,k)**2)*boygr(i,j,k)/q2b(i,j,k)
        gh(i,j,k) = min(gh(i,j,k), .028d0)
      end do
    end do
  end do
  do j = 1, jm
    do i = 1, im
      l(i,j,1) = kappa*l0(i,j)
      l(i,j,kb) = 0.d0
      gh(i,j,1) = 0.d0
      gh(i,j,kb) = 0.d0
    end do
  end do
  ! production of turbulent kinetic energy
  do k = 2, kbm1
    do j = 2, jmm1
      do i = 2, imm1
        prod(i,j,k) = km(i,j,k)*.25d0*sef &
                      *((u(i,j,k) - u(i,j,k-1) + u(i+1,j,k) - u(i+1,j,k-1))**2 &
                        + (v(i,j,k) - v(i,j,k-1) + v(i,j+1,k) - v(i,j+1,k-1))**2) &
                      /(dzz(k-1)*dh(i,j))**2 &
                      - shiw*km(i,j,k)*boygr(i,j,k)
        prod(i,j,k) = prod(i,j,k) + kh(i,j,k)*boygr(i,j,k)
      end do
    end do
  end do
  ! dissipation (stf=1: no Richardson-number correction, as pom2k)
  ghc = -6.0d0
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        stf(i,j,k) = 1.d0
        dtef(i,j,k) = sqrt(abs(q2b(i,j,k)))*stf(i,j,k)/(b1*l(i,j,k) + small)
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        gg(i,j,k) = 1.d0/(a(i,j,k) + c(i,j,k)*(1.d0 - ee(i,j,k-1)) &
                          - (2.d0*dti2*dtef(i,j,k) + 1.d0))
        ee(i,j,k) = a(i,j,k)*gg(i,j,k)
        gg(i,j,k) = (-2.d0*dti2*prod(i,j,k) + c(i,j,k)*gg(i,j,k-1) - uf(i,j,k))*gg(i,j,k)
      end do
    end do
  end do
  do k = 1, kbm1
    ki = kb - k
    do j = 1, jm
      do i = 1, im
        uf(i,j,ki) = ee(i,j,ki)*uf(i,j,ki+1) + gg(i,j,ki)
      end do
    end do
  end do

  ! q2l equation:  dti2(kq*q2l')' - q2l*(dti2*dtef+1.) = -q2lb
  ! the surface values ee(1), gg(1) are those of the q2 equation
  do j = 1, jm
    do i = 1, im
      vf(i,j,kb) = 0.d0
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        dtef(i,j,k) = dtef(i,j,k)*(1.d0 + e2*((1.d0/abs(z(k) - z(1)) &
                                               + 1.d0/abs(z(k) - z(kb))) &
                                              *l(i,j,k)/(dh(i,j)*kappa))**2)
      end do
    end do
  end do
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        gg(i,j,k) = 1.d0/(a(i,j,k) + c(i,j,k)*(1.d0 - ee(i,j,k-1)) &
                          - (dti2*dtef(i,j,k) + 1.d0))
        ee(i,j,k) = a(i,j,k)*gg(i,j,k)
        gg(i,j,k) = (dti2*(-prod(i,j,k)*l(i,j,k)*e1) + c(i,j,k)*gg(i,j,k-1) - vf(i,j,k)) &
                    *gg(i,j,k)
      end do
    end do
  end do
  do k = 1, kb-2
    ki = kb - k
    do j = 1, jm
      do i = 1, im
        vf(i,j,ki) = ee(i,j,ki)*vf(i,j,ki+1) + gg(i,j,ki)
      end do
    end do
  end do
  ! counter the ratio of two small numbers (l = q2l/q2) or one of them
  ! going negative: pom2k's first option
  do k = 2, kbm1
    do j = 1, jm
      do i = 1, im
        if (uf(i,j,k) <= small .or. vf(i,j,k) <= small) then
          uf(i,j,k) = small
          vf(i,j,k) = 0.1d0*dt(i,j)*small
        end if
      end do
    end do
  end do

  ! stability functions sm (in a) and sh (in c); they tend to infinity
  ! as gh approaches 0.0288
  coef4 = 18.d0*a1*a1 + 9.d0*a1*a2
  coef5 = 9.d0*a1*a2
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        coef1 = a2*(1.d0 - 6.d0*a1/b1*stf(i,j,k))
        coef2 = 3.d0*a2*b2/stf(i,j,k) + 18.d0*a1*a2
        coef3 = a1*(1.d0 - 3.d0*c1 - 6.d0*a1/b1*stf(i,j,k))
        c(i,j,k) = coef1/(1.d0 - coef2*gh(i,j,k))
        a(i,j,k) = coef3 + c(i,j,k)*coef4*gh(i,j,k)
        a(i,j,k) = a(i,j,k)/(1.d0 - coef5*gh(i,j,k))
      end do
    end do
  end do
  ! kq after the first of pom2k's two options
  do k = 1, kb
    do j = 1, jm
      do i = 1, im
        prod(i,j,k) = l(i,j,k)*sqrt(abs(q2(i,j,k)))
        kq(i,j,k) = (prod(i,j,k)*.41d0*c(i,j,k) + kq(i,j,k))*.5d0
        km(i,j,k) = (prod(i,j,k)*a(i,j,k) + km(i,j,k))*.5d0
        kh(i,j,k) = (prod(i,j,k)*c(i,j,k) + kh(i,j,k))*.5d0
      end do
    end do
  end do
  ! cosmetics: boundary values as interior
  do k = 1, kb
    do i = 1, im
      km(i,jm,k) = km(i,jmm1,k)*fsm(i,jm)
      kh(i,jm,k) = kh(i,jmm1,k)*fsm(i,jm)
      km(i,1,k) = km(i,2,k)*fsm(i,1)
      kh(i,1,k) = kh(i,2,k)*fsm(i,1)
    end do
    do j = 1, jm
      km(im,j,k) = km(imm1,j,k)*fsm(im,j)
      kh(im,j,k) = kh(imm1,j,k)*fsm(im,j)
      km(1,j,k) = km(2,j,k)*fsm(1,j)
      kh(1,j,k) = kh(2,j,k)*fsm(1,j)
    end do
  end do
end subroutine profq
